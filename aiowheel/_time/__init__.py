"""The driver: the hierarchical wheel (and its native core, ``_core.c`` with its parts under
``_native/``), its entries, the store, the reaper and its one wake-up, dispatch, threads,
the loop binding, the clock and the tick grid, and ``Timer`` over them (tokio's
``runtime/time``). Imports only ``_common``.
"""
