#ifndef GEOMETRY_H
#define GEOMETRY_H

/* Precision used when printing results. */
#define GEOM_DECIMALS 2

double hypotenuse(double a, double b);
double triangle_area(double a, double b);

#endif
