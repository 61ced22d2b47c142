"""What the tests share, one module per thing it holds. A test module imports from here or uses
tests/conftest.py's fixtures, never another test module (tests/unit/test_tests_import_no_tests.py).
"""
