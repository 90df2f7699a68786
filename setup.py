# Beam's --setup_file builds an sdist from this; all metadata lives in pyproject.toml.
from setuptools import setup

setup()
