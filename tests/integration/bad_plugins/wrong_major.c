/* A plugin built against a future ABI major: the core must refuse it by name. */
#include "halo/device_abi.h"

static halo_plugin_api table = {
    .struct_size = sizeof(halo_plugin_api),
    .abi_major = HALO_ABI_VERSION_MAJOR + 1,
    .abi_minor = 0,
    .plugin_name = "future",
    .plugin_version = "99.0",
};

HALO_PLUGIN_EXPORT const halo_plugin_api* halo_plugin_get_api(void) { return &table; }
