"""Code the test modules share (imported as `tests.helpers.<module>`): paths, benchmark
copies and the CLI runner, loopback servers, archive builders."""
