"""The recorder's optional C fast path (workloads/_tracefast.c); everything else about the
package is in pyproject.toml. Optional: where no C compiler or Python headers are found,
the install goes on without it and the recorder's Python wrappers take every call (the
same records, at their cost: docs/trace.md, "The C fast path")."""
from setuptools import Extension, setup

setup(ext_modules=[Extension("workloads._tracefast", ["workloads/_tracefast.c"], optional=True)])
