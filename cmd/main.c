/* placeholder: replaced by the CLI */
#include "cmd/commands.h"
int main(int argc, char **argv) { return sg_cmd_train(argc, argv); }
