/* cli.c -- placeholder until the engine lands */
#include "cli.h"
int sits_cli_main(int argc, char **argv) { return 0; }
