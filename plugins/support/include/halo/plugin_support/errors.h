// Error handling shared by the in-tree plugins (cpu, cuda). Inside a plugin
// failures are C++ exceptions (PluginError carries the ABI status code);
// every exported function converts them to a halo_error at the boundary (see
// guarded()), so no exception crosses the ABI.
#pragma once
#include <type_traits>

#include <exception>
#include <memory>
#include <string_view>
#include <new>
#include <sstream>
#include <string>
#include <utility>

#include "halo/device_abi.h"

struct halo_error {
  halo_status_code code;
  std::string message;
};

namespace halo::plugin {

class PluginError : public std::exception {
 public:
  PluginError(halo_status_code code, std::string message)
      : code_(code), message_(std::move(message)) {}
  halo_status_code code() const noexcept { return code_; }
  const char* what() const noexcept override { return message_.c_str(); }

 private:
  halo_status_code code_;
  std::string message_;
};

template <class... A>
std::string cat(const A&... a) {
  std::ostringstream os;
  (os << ... << a);
  return os.str();
}

template <class... A>
[[noreturn]] void fail(halo_status_code code, const A&... a) {
  throw PluginError(code, cat(a...));
}

template <class... A>
[[noreturn]] void invalid(const A&... a) {
  throw PluginError(HALO_STATUS_INVALID_ARGUMENT, cat(a...));
}

template <class... A>
[[noreturn]] void out_of_range(const A&... a) {
  throw PluginError(HALO_STATUS_OUT_OF_RANGE, cat(a...));
}

// The error returned when even allocating an error fails; never freed.
halo_error* static_oom_error() noexcept;
// The error object handed out when even allocating an error fails.
inline halo_error* static_oom_error() noexcept {
  static halo_error e{HALO_STATUS_OUT_OF_MEMORY, "out of host memory while reporting an error"};
  return &e;
}

// A new error object; `where` is prefixed unless the message starts with it
// (PluginError messages usually name their function already).
inline halo_error* make_error(halo_status_code code, const char* where, const char* message) noexcept {
  try {
    auto e = std::make_unique<halo_error>();
    e->code = code;
    const std::string_view m(message ? message : "");
    if (m.rfind(where, 0) == 0)
      e->message = std::string(m);
    else
      e->message = cat(where, ": ", m);
    return e.release();
  } catch (...) {
    return static_oom_error();
  }
}

// The three error entries of the function table.
inline halo_status_code error_code(const halo_error* e) { return e ? e->code : HALO_STATUS_OK; }
inline const char* error_message(const halo_error* e) { return e ? e->message.c_str() : ""; }
inline void error_destroy(halo_error* e) {
  if (e != nullptr && e != static_oom_error()) std::unique_ptr<halo_error> owned(e);
}

// Runs f() and converts whatever it throws into a halo_error owned by the caller.
template <class F>
halo_error* guarded(const char* where, F&& f) noexcept {
  try {
    f();
    return nullptr;
  } catch (const PluginError& e) {
    return make_error(e.code(), where, e.what());
  } catch (const std::bad_alloc&) {
    return make_error(HALO_STATUS_OUT_OF_MEMORY, where, "out of host memory");
  } catch (const std::exception& e) {
    return make_error(HALO_STATUS_INTERNAL, where, e.what());
  } catch (...) {
    return make_error(HALO_STATUS_INTERNAL, where, "unknown exception");
  }
}

// Size of T in ABI v1.0: what the oldest caller passes. Structs that grew in
// a later minor version name their last v1.0 field here.
template <class T>
constexpr size_t v10_size() {
  if constexpr (std::is_same_v<T, halo_model_spec>) return HALO_STRUCT_SIZE(halo_model_spec, flags);
  if constexpr (std::is_same_v<T, halo_limits>) return HALO_STRUCT_SIZE(halo_limits, kv_memory_available);
  // v1.4 appended quantized_weights: a v1.3 caller's struct ends before them.
  if constexpr (std::is_same_v<T, halo_prepare_args>)
    return HALO_STRUCT_SIZE(halo_prepare_args, executable);
  if constexpr (std::is_same_v<T, halo_compile_args>)  // introduced in v1.1
    return HALO_STRUCT_SIZE(halo_compile_args, summary_capacity);
  return sizeof(T);
}

// Checks an argument struct pointer and its struct_size against the v1.0 size.
template <class T>
void check_args(const char* where, const T* args, const char* name = "args") {
  if (args == nullptr) invalid(name, " is NULL");
  if (args->struct_size < v10_size<T>())
    invalid(name, "->struct_size=", args->struct_size, " is smaller than the v1.0 size ", v10_size<T>());
  (void)where;
}

template <class T>
void check_args(const T* args, const char* name) {
  check_args("", args, name);
}

// Whether the caller's struct holds `field` (it may be older than ours).
#define HALO_HAS_FIELD(ptr, type, field) ((ptr)->struct_size >= HALO_STRUCT_SIZE(type, field))

}  // namespace halo::plugin
