import os
import sys

# The tests' helper module (pes.py) must be importable in spawned PEs.
sys.path.insert(0, os.path.dirname(__file__))
