#!/bin/sh
# Reads the call's arguments, {"city": ...}, on stdin.
read -r args
echo "Sunny, 18 C (arguments: $args)"
