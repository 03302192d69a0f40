"""The tests of request deadlines and their adapters (aiowheel/_deadlines/)."""
