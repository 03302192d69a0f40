"""The pytest plugin's rooms: options, the lingering-timer check, the factories each test
gets, fuzzing, the loops tests make themselves, the tally, and the hooks
:mod:`aiowheel.pytest` hands to pytest. Imports ``_common``, ``_time``, ``_seeing``,
``_virtual`` and ``_loopmode``.
"""
