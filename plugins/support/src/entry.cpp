#include "halo/plugin_support/entry.h"

namespace halo::plugin {

// Writes a field only when it lies wholly inside the caller's struct.
#define HALO_PUT(field)                                               \
  do {                                                                \
    if (HALO_STRUCT_SIZE(halo_device_properties, field) <= size)      \
      std::memcpy(&out->field, &p.field, sizeof(p.field));            \
  } while (0)

void put_properties(halo_device_get_properties_args* args, const halo_device_properties& p) {
  halo_device_properties* out = args->properties;
  if (out == nullptr) invalid("device_get_properties: properties is NULL");
  const size_t size = out->struct_size;
  if (size < HALO_STRUCT_SIZE(halo_device_properties, kind))
    invalid("device_get_properties: properties->struct_size=", size, " is too small (at least ",
            HALO_STRUCT_SIZE(halo_device_properties, kind), ")");
  HALO_PUT(kind);
  HALO_PUT(name);
  HALO_PUT(vendor);
  HALO_PUT(memory_bytes);
  HALO_PUT(memory_free_bytes);
  HALO_PUT(num_chips);
  HALO_PUT(capabilities);
  HALO_PUT(max_batch_size);
  HALO_PUT(required_block_size);
  HALO_PUT(max_model_len);
  HALO_PUT(kv_cache_dtypes);
  HALO_PUT(compute_dtypes);
  HALO_PUT(quant_types);
}
#undef HALO_PUT

void check_device_index(const char* where, int32_t index, int32_t count) {
  if (index < 0 || index >= count)
    out_of_range(where, ": device_index=", index, " is outside [0, ", count, ")");
}

}  // namespace halo::plugin
