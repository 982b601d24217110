#!/bin/bash
base64 -d /app/message.enc | gunzip | tr 'A-Za-z' 'N-ZA-Mn-za-m' > /app/message.txt
