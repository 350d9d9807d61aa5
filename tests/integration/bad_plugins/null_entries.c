/* Right ABI version, but required entries of the table are NULL. */
#include "halo/device_abi.h"

static halo_plugin_api table = {
    .struct_size = sizeof(halo_plugin_api),
    .abi_major = HALO_ABI_VERSION_MAJOR,
    .abi_minor = HALO_ABI_VERSION_MINOR,
    .plugin_name = "hollow",
    .plugin_version = "0",
};

HALO_PLUGIN_EXPORT const halo_plugin_api* halo_plugin_get_api(void) { return &table; }
