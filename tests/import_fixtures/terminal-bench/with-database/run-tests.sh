#!/bin/bash
pip install psycopg2-binary pytest
pytest $TEST_DIR/test_outputs.py -rA
