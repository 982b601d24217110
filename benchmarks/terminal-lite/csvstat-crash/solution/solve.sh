#!/bin/bash
set -e
cat > /app/csvstat/csvstat.c <<'C'
/* csvstat: count/min/max/mean of one column of a CSV file. */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Returns field number `want` of `line` (fields split on ',', empty ones kept), or NULL. */
static char *field(char *line, int want)
{
    char *p = line;
    for (int i = 0; p; i++) {
        char *next = strchr(p, ',');
        if (next)
            *next++ = '\0';
        if (i == want)
            return p;
        p = next;
    }
    return NULL;
}

static void chomp(char *s)
{
    size_t n = strlen(s);
    while (n > 0 && (s[n - 1] == '\n' || s[n - 1] == '\r'))
        s[--n] = '\0';
}

int main(int argc, char **argv)
{
    if (argc != 3) {
        fprintf(stderr, "usage: csvstat FILE COLUMN\n");
        return 2;
    }
    FILE *f = fopen(argv[1], "r");
    if (!f) {
        perror(argv[1]);
        return 1;
    }
    char *line = NULL;
    size_t cap = 0;
    int col = -1, count = 0;
    double min = 0, max = 0, sum = 0;

    if (getline(&line, &cap, f) < 0) {
        fprintf(stderr, "csvstat: no column named %s\n", argv[2]);
        return 2;
    }
    chomp(line);
    char *p = line;
    for (int i = 0; p; i++) {
        char *next = strchr(p, ',');
        if (next)
            *next++ = '\0';
        if (col < 0 && strcmp(p, argv[2]) == 0)
            col = i;
        p = next;
    }
    if (col < 0) {
        fprintf(stderr, "csvstat: no column named %s\n", argv[2]);
        return 2;
    }
    while (getline(&line, &cap, f) >= 0) {
        chomp(line);
        if (line[0] == '\0')
            continue;
        char *v = field(line, col);
        if (!v || v[0] == '\0')
            continue;
        double x = atof(v);
        if (count == 0 || x < min)
            min = x;
        if (count == 0 || x > max)
            max = x;
        sum += x;
        count++;
    }
    free(line);
    fclose(f);
    if (count == 0)
        printf("count=0\n");
    else
        printf("count=%d min=%.2f max=%.2f mean=%.2f\n", count, min, max, sum / count);
    return 0;
}
C
make -C /app/csvstat -B
