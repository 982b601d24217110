#!/bin/bash
ok=1
[ "$(bash /app/sum.sh 1 2 3)" = "6" ] || ok=0
[ "$(bash /app/sum.sh 10 -4)" = "6" ] || ok=0
[ "$(bash /app/sum.sh)" = "0" ] || ok=0
echo $ok > /logs/verifier/reward.txt
