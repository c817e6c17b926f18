// The ops libraries' lite builds a lite variant calls (ops_libraries.cpp).
#pragma once

#include <string>
#include <vector>

#include <pt2rt/pt2rt.h>

namespace pt2rt::lite {

// pt2rt_op_<ns>_<op>: the C function of NS::OP's lite entry
std::string op_symbol(const std::string& name);

// Loads (once per process, globally) the lite ops libraries spec's custom ops need and checks each has its ops'
// entries; returns their absolute paths. Refuses TorchBind classes and ops without a lite build, as OpsLibrary.
std::vector<std::string> load_ops_libraries(const Spec& spec, const std::string& package_path, const Options& options);

}  // namespace pt2rt::lite
