"""Virtual time: the virtual clock and its fuzzing, the threads it waits for, and how each
kind of loop tells it that it is idle. Imports ``_common``, ``_time`` and ``_seeing``; loop
mode installs it.
"""
