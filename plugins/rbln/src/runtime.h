// The rbln plugin's objects behind the ABI handles, and its entry points.
#pragma once

#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "common.h"

struct halo_device {
  int index = 0;
  halo::rbln::Driver* drv = nullptr;
  int command_timeout_ms = 0;
};

// Device memory owned by RAII.
struct DeviceMem {
  ze_context_handle_t ctx = nullptr;
  void* ptr = nullptr;
  DeviceMem() = default;
  DeviceMem(ze_context_handle_t c, void* p) : ctx(c), ptr(p) {}
  DeviceMem(DeviceMem&& o) noexcept : ctx(o.ctx), ptr(o.ptr) { o.ptr = nullptr; }
  DeviceMem& operator=(DeviceMem&& o) noexcept {
    std::swap(ctx, o.ctx);
    std::swap(ptr, o.ptr);
    return *this;
  }
  ~DeviceMem() {
    if (ptr) zeMemFree(ctx, ptr);
  }
};

struct halo_executable {
  halo::rbln::Driver* drv = nullptr;
  int timeout_ms = 5000;
  std::string dir;
  halo::rbln::ModelDims dims;
  int32_t batch = 0, max_seq_len = 0, tp = 1, chunk = 128;
  int32_t spec_k = 0;            // proposed tokens per sequence a verify checks (0: no verify)
  std::vector<int32_t> buckets;  // descending
  std::vector<ze_device_handle_t> chips;
  std::vector<DeviceMem> weight_mem;
  std::vector<void*> weight_ptrs;  // [tp][slots]
  DeviceMem logits_mem;
  size_t logits_rows = 0;
  ze_rbln_graph_handle_t prefill = nullptr;
  std::vector<std::pair<int32_t, ze_rbln_graph_handle_t>> decode;  // bucket -> graph
  std::vector<std::pair<int32_t, ze_rbln_graph_handle_t>> verify;  // bucket -> graph (spec_k > 0)
  ze_command_queue_handle_t queue = nullptr;
  ze_command_list_handle_t list = nullptr;
  std::mutex mu;
  std::string failed;  // set once the device failed: every later step refuses
  ~halo_executable();
};

struct halo_kv_cache {
  halo_executable* owner = nullptr;
  int32_t num_blocks = 0;
  std::vector<DeviceMem> mem;
  std::vector<void*> ptrs;  // [tp][layers][2]
};

namespace halo::rbln {

void compile(halo_compile_args* args);
void prepare(halo_prepare_args* args);
void kv_cache_create(halo_kv_cache_create_args* args);
void kv_cache_copy_blocks(halo_kv_cache_copy_blocks_args* args);
void execute(halo_execute_args* args);

}  // namespace halo::rbln
