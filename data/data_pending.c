/* placeholder so the library is not empty; removed when the module lands */
int sg_data_placeholder(void) { return 0; }
