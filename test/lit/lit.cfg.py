# lit configuration for h3c (the mlir/examples/standalone layout).
import os
import lit.formats


# ctest runs lit on single source files; the build's site values come in through --param h3c_site_config.
if not hasattr(config, "h3c_obj_root"):
    lit_config.load_config(config, lit_config.params["h3c_site_config"])
import lit.llvm
lit.llvm.initialize(lit_config, config)
from lit.llvm import llvm_config  # set by initialize(); importing it earlier binds None


config.name = "H3C"
config.test_format = lit.formats.ShTest(not llvm_config.use_lit_shell)
config.suffixes = [".mlir", ".test"]
config.excludes = ["Inputs", "lit.cfg.py", "lit.site.cfg.py.in"]
config.test_source_root = os.path.dirname(__file__)
config.test_exec_root = os.path.join(config.h3c_obj_root, "test", "lit")

config.substitutions.append(("%PATH%", config.environment["PATH"]))
config.substitutions.append(("%h3c_src", config.h3c_src_root))
config.substitutions.append(("%h3c_bin", config.h3c_tools_dir))
llvm_config.with_system_environment(["HOME", "INCLUDE", "LIB", "TMP", "TEMP"])
llvm_config.use_default_substitutions()

tool_dirs = [config.h3c_tools_dir, config.llvm_tools_dir]
llvm_config.add_tool_substitutions(["h3c-opt", "h3c", "mlir-opt", "FileCheck", "not", "count"], tool_dirs)
