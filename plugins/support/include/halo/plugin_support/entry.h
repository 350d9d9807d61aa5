// The entry boilerplate every in-tree plugin shares: the functions of the
// exported halo_plugin_api table are generated from plain C++ functions that
// throw (entry<"name", fn>: the exception becomes a halo_error naming the
// entry, see guarded()), objects are freed by destroy<T>, and
// device_get_properties copies only the fields that fit the caller's struct
// (put_properties). A plugin then holds only what differs: its facts and its work.
//
//   constexpr halo_plugin_api kApi = {..., entry<"prepare", prepare>, destroy<halo_executable>, ...};
#pragma once
#include <algorithm>
#include <cstddef>
#include <cstring>
#include <memory>

#include "halo/plugin_support/errors.h"

namespace halo::plugin {

// A string usable as a template argument (the entry's name).
template <size_t N>
struct EntryName {
  constexpr EntryName(const char (&s)[N]) { std::copy_n(s, N, name); }  // NOLINT: implicit by design
  char name[N];
};

// The exported function for `Fn(Args*)`: runs it and returns what it threw as
// a halo_error owned by the caller (NULL on success). Never throws.
template <EntryName Name, auto Fn, class Args>
halo_error* entry_of(Args* args) noexcept {
  return guarded(Name.name, [&] { Fn(args); });
}
template <class F>
struct ArgsOf;
template <class A>
struct ArgsOf<void (*)(A*)> {
  using type = A;
};
template <EntryName Name, auto Fn>
inline constexpr auto entry = &entry_of<Name, Fn, typename ArgsOf<decltype(Fn)>::type>;

// The *_destroy entries: NULL is accepted (the header's rule).
template <class T>
void destroy(T* object) noexcept {
  std::unique_ptr<T> owned(object);
}

// device_get_properties' output: checks args->properties and its struct_size
// (at least up to `kind`), then copies each field of `p` that lies wholly
// inside the caller's struct (an older caller's struct is shorter).
void put_properties(halo_device_get_properties_args* args, const halo_device_properties& p);

// The index check of a plugin with `count` devices: OUT_OF_RANGE naming `where`.
void check_device_index(const char* where, int32_t index, int32_t count);

}  // namespace halo::plugin
