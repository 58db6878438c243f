/* main.c — placeholder while the sub-commands land. */
#include <stdio.h>
int main(void) { puts("trident"); return 0; }
