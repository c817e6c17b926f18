// One JSON object per line on stderr: {"ts": ..., "level": ..., "msg": ..., <fields>}.
#pragma once

#include <chrono>
#include <cstdio>
#include <ctime>
#include <map>
#include <mutex>
#include <string>

#include <nlohmann/json.hpp>

namespace pt2serve {

inline void log(const char* level, const std::string& msg, const std::map<std::string, std::string>& fields = {}) {
  static std::mutex mu;
  const auto now = std::chrono::system_clock::now();
  const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(now.time_since_epoch()).count();
  const std::time_t secs = static_cast<std::time_t>(ms / 1000);
  std::tm tm{};
  gmtime_r(&secs, &tm);
  char ts[64];
  std::snprintf(ts, sizeof ts, "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ", tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday,
                tm.tm_hour, tm.tm_min, tm.tm_sec, static_cast<int>(ms % 1000));
  nlohmann::json j = {{"ts", ts}, {"level", level}, {"msg", msg}};
  for (const auto& [k, v] : fields) j[k] = v;
  const std::string line = j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
  std::lock_guard<std::mutex> lock(mu);
  std::fputs(line.c_str(), stderr);
}

}  // namespace pt2serve
