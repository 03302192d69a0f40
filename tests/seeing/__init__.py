"""The tests of the census and the OpenTelemetry instruments (aiowheel/_seeing/)."""
