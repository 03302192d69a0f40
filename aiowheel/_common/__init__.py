"""The ground floor: what every folder may read. Which build runs, the errors and the warning
every layer raises, the base loops' records (data only: no base library is imported), and
every argument check. Imports nothing of aiowheel's outside this folder.
"""
