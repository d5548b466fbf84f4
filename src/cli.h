/* cli.h -- command-line modes of sits-dist. */
#ifndef SITS_CLI_H
#define SITS_CLI_H
int sits_cli_main(int argc, char **argv);
#endif
