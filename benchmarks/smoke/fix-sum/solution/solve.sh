#!/bin/bash
sed -i 's/total - n/total + n/' "$SUM_SCRIPT"
