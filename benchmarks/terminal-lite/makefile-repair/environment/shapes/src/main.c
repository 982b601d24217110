#include <stdio.h>
#include <stdlib.h>
#include "geometry.h"

int main(int argc, char **argv)
{
    if (argc != 3) {
        fprintf(stderr, "usage: shapes A B\n");
        return 2;
    }
    double a = atof(argv[1]), b = atof(argv[2]);
    printf("hypot=%.*f area=%.*f\n", GEOM_DECIMALS, hypotenuse(a, b), GEOM_DECIMALS,
           triangle_area(a, b));
    return 0;
}
