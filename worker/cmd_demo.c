#include "cmd.h"
int tb_cmd_demo(int argc, char **argv) { (void)argc; (void)argv; return 0; }
