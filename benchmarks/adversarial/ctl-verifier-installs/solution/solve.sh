#!/bin/bash
echo ahe-token-7c1d2f > /app/answer.txt
