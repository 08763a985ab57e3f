"""Runs a command with a pseudo-terminal as its stdin, stdout and stderr (Python's pty module);
what it writes is copied to this script's stdout, so a test sees what a person at a terminal sees.

usage: run_in_pty.py PROGRAM [ARGS...]   (exits with the program's exit code)
"""
import os
import pty
import sys

status = pty.spawn(sys.argv[1:])
sys.exit(os.waitstatus_to_exitcode(status))
