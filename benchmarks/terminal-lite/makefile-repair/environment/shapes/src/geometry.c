#include <math.h>
#include "geometry.h"

double hypotenuse(double a, double b)
{
    return sqrt(a * a + b * b);
}

double triangle_area(double a, double b)
{
    return a * b / 2.0;
}
