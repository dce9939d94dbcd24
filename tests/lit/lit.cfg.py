# lit configuration for the .fir text tests: each file's RUN lines run `fusec` and pipe
# the output into FileCheck against the CHECK lines beside the input.
import os
import sys
import lit.formats

config.name = "fusec"
config.test_format = lit.formats.ShTest(execute_external=False)
config.suffixes = [".fir", ".test"]
config.test_source_root = os.path.dirname(__file__)
config.test_exec_root = os.path.join(config.fusec_binary_dir, "tests", "lit")
config.excludes = ["inputs"]
config.substitutions.append(("%fusec", os.path.join(config.fusec_binary_dir, "fusec")))
# The repository's root (scripts/ and the sources, for tests of the tree itself) and python.
config.substitutions.append(("%srcroot", os.path.dirname(os.path.dirname(config.test_source_root))))
config.substitutions.append(("%python", sys.executable))
config.environment["PATH"] = os.pathsep.join(
    [config.filecheck_dir, config.fusec_binary_dir, config.environment.get("PATH", "")])
