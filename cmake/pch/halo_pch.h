// The heavy headers nearly every file of halo's serving code includes,
// compiled once per build as a precompiled header (cmake/HaloPch.cmake) and
// force-included before each file's own includes. Only third-party and
// standard headers: a change to halo's own headers never rebuilds it.
#pragma once
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <random>
#include <set>
#include <span>
#include <sstream>
#include <string>
#include <string_view>
#include <thread>
#include <unordered_map>
#include <utility>
#include <variant>
#include <vector>
