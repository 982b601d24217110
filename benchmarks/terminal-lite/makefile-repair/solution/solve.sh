#!/bin/bash
set -e
cd /app/shapes
cat > Makefile <<'MK'
CC = gcc
CFLAGS = -O2 -Wall
LDLIBS = -lm
OBJS = build/main.o build/geometry.o

all: build/shapes

build/shapes: $(OBJS)
	$(CC) $(CFLAGS) -o $@ $(OBJS) $(LDLIBS)

build/%.o: src/%.c src/geometry.h
	mkdir -p build
	$(CC) $(CFLAGS) -c -o $@ $<

clean:
	rm -rf build

.PHONY: all clean
MK
make
