/* cmd/commands_pending.c - commands whose issue has not landed yet. Each
 * prints what it is waiting for and exits 2; a command's real file replaces
 * its entry here when it lands. */
#include "cmd/commands.h"
#include "cmd/log.h"

/* unused while no command is pending (every issue has landed) */
__attribute__((unused)) static int pending(const char *cmd, const char *what) {
    SG_ERROR("'segtrain %s' is not available yet: it comes with %s (see README, feature state)",
             cmd, what);
    return 2;
}
