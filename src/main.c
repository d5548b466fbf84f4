/* main.c -- sits-dist entry point: everything happens in cli.c. */
#include "cli.h"

int main(int argc, char **argv) { return sits_cli_main(argc, argv); }
