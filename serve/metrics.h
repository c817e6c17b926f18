// pt2serve's /metrics: each model version's books (model.h Stats) in Prometheus' text format (version 0.0.4).
#pragma once

#include <string>
#include <vector>

#include "model.h"

namespace pt2serve {

// A label value as the text format writes it: backslash, double quote and newline escaped.
std::string prometheus_label(const std::string& value);
// Every family of every model version, labelled {model, version}.
std::string prometheus_text(const std::vector<ModelPtr>& models);

}  // namespace pt2serve
