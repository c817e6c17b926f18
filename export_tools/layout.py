"""Where things are in a package (a PT2 archive, every record under the archive's root folder). A module of its own
so that what writes packages (export, cross, lite) and what reads them (package) share it without importing each
other; the C++ reader is runtime/src/package.cpp.

    data/aotinductor/<model>/         one folder per CPU variant ("model" for the first, AOTInductor's default name;
                                      "<isa>_model" for the others), each with AOTInductor's records and library
    data/aotinductor/<model>/*_metadata.json   AOTInductor's metadata, with the spec under SPEC_KEY in each
    data/constants/, data/weights/    the constants and custom objects the variants share
    GOLDEN_RECORD                     the golden cases
"""

SPEC_FORMAT = "pt2rt-spec/2"
SPEC_KEY = "pt2rt_spec"                  # key of the spec in the AOTI metadata
GOLDEN_RECORD = "pt2rt/golden.pt"        # golden cases, relative to the archive root
MODELS_DIR = "data/aotinductor/"         # every variant's model folder is in here


def model_dir(name: str) -> str:
    """The folder of model `name` in the archive ("model": AOTInductor's own default)."""
    return f"{MODELS_DIR}{name}/"
