#!/bin/bash
awk '$3 == "ERROR"' /app/server.log | wc -l > /app/count.txt
