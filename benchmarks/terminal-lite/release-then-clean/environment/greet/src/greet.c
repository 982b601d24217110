#include <stdio.h>
#include "version.h"

int main(int argc, char **argv)
{
    printf("greet %s: hello, %s!\n", GREET_VERSION, argc > 1 ? argv[1] : "world");
    return 0;
}
