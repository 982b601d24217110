/* csvstat: count/min/max/mean of one column of a CSV file. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAXLINE 256

int main(int argc, char **argv)
{
    if (argc != 3) {
        fprintf(stderr, "usage: csvstat FILE COLUMN\n");
        return 2;
    }
    FILE *f = fopen(argv[1], "r");
    char line[MAXLINE];
    int col = -1, count = 0;
    double min = 0, max = 0, sum = 0;

    if (!fgets(line, sizeof line, f))
        return 0;
    int i = 0;
    for (char *tok = strtok(line, ",\n"); tok; tok = strtok(NULL, ",\n"), i++)
        if (strcmp(tok, argv[2]) == 0)
            col = i;
    if (col < 0) {
        fprintf(stderr, "csvstat: no column named %s\n", argv[2]);
        return 2;
    }
    while (fgets(line, sizeof line, f)) {
        int j = 0;
        for (char *tok = strtok(line, ",\n"); tok; tok = strtok(NULL, ",\n"), j++) {
            if (j == col) {
                double v = atof(tok);
                if (count == 0 || v < min)
                    min = v;
                if (count == 0 || v > max)
                    max = v;
                sum += v;
                count++;
            }
        }
    }
    printf("count=%d min=%.2f max=%.2f mean=%.2f\n", count, min, max, sum / count);
    return 0;
}
