import os
import sys

# tests/differential.py and friends are helpers, importable by name.
sys.path.insert(0, os.path.dirname(__file__))
