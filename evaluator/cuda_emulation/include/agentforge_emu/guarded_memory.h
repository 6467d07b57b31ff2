// agentforge CUDA emulation: torch's CPU allocations against guard pages, as compute-sanitizer
// checks a GPU's global memory.
//
// Every CPU tensor allocation of a process that loaded an emulated extension gets its own mapping:
// PROT_NONE guard pages on both sides of the data pages, and the data placed so that it ends exactly
// at the upper guard (overflow mode) or starts right after the lower guard (underflow mode), the mode
// drawn per allocation from a seeded sequence, so several trials test both directions. In overflow
// mode the start keeps the natural alignment of the size (its lowest set bit, at most 64 bytes), so a
// float4 path of a tensor whose size is a multiple of 16 stays aligned. A free keeps the mapping for
// reuse by an allocation of as many pages (up to SPARE_BYTES in all), else unmaps it. Every
// allocation starts filled with 0xFF bytes, so a value a kernel never wrote shows. Any access
// past the end (overflow mode) or before the start (underflow mode), up to GUARD_BYTES away, faults;
// the runtime's signal handler turns a fault inside a kernel launch into a launch failure naming the
// allocation (`describe`).
//
// Several emulated extensions may be loaded in one process, each with its own copy of this header:
// the first installs the allocator and publishes its `Api` (process id and address) in the
// environment variable AGENTFORGE_EMU_GUARD; the others find it there. AGENTFORGE_EMU_GUARD=off
// before the first load leaves torch's allocator in place.
#pragma once

#include <sys/mman.h>
#include <unistd.h>

#include <cinttypes>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>

#include <c10/core/Allocator.h>
#include <c10/core/CPUAllocator.h>

namespace emu::guard {

inline constexpr size_t GUARD_BYTES = 64 * 1024;
inline constexpr uint64_t MAGIC = 0x61666775617264ull;  // "afguard"

struct Api {
  uint64_t magic;
  // A message for an address inside a guard of a live allocation (true), or false.
  bool (*describe)(uintptr_t addr, bool write, char* out, size_t n);
  int forced;  // -1: each allocation's mode drawn from the seeded sequence; 0: underflow; 1: overflow (tests)
};

inline bool describe(uintptr_t addr, bool write, char* out, size_t n);
inline Api g_own_api{MAGIC, &describe, -1};

struct Mapping { uintptr_t base; size_t total; uintptr_t start; size_t bytes; };

inline constexpr size_t SPARE_BYTES = 128u << 20, SPARE_ONE = 32u << 20;

struct Registry {
  std::mutex mutex;
  std::map<uintptr_t, Mapping> by_start;  // live allocations by their data's first byte
  std::multimap<size_t, uintptr_t> spare;  // freed mappings by data bytes, kept for reuse (no system call,
  size_t spare_bytes = 0;                  // no page fault: a fresh mapping costs several times malloc)
  uint64_t seed = 0x5eed5eedull, count = 0;
};

inline Registry& registry() { static Registry* r = new Registry(); return *r; }  // never destroyed

inline uint64_t mix(uint64_t x) {  // splitmix64
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

// Freed by its data pointer (context and data are one, as `raw_allocate` users of torch require).
inline void release(void* data_ptr) {
  Registry& r = registry();
  Mapping m{};
  {
    std::lock_guard<std::mutex> lock(r.mutex);
    auto it = r.by_start.find(reinterpret_cast<uintptr_t>(data_ptr));
    if (it == r.by_start.end()) { std::free(data_ptr); return; }  // an unguarded fallback block (raw_deleter)
    m = it->second;
    r.by_start.erase(it);
    size_t data = m.total - 2 * GUARD_BYTES;
    if (data <= SPARE_ONE && r.spare_bytes + data <= SPARE_BYTES) {
      r.spare.emplace(data, m.base);
      r.spare_bytes += data;
      return;
    }
  }
  munmap(reinterpret_cast<void*>(m.base), m.total);
}

inline void release_plain(void* p) { std::free(p); }

struct Allocator final : c10::Allocator {
  c10::DataPtr allocate(size_t n) override {
    if (n == 0) return {nullptr, nullptr, &release_plain, c10::Device(c10::DeviceType::CPU)};
    static const size_t page = (size_t)sysconf(_SC_PAGESIZE);
    size_t data = (n + page - 1) / page * page, total = GUARD_BYTES + data + GUARD_BYTES;
    Registry& r = registry();
    void* p = nullptr;
    {
      std::lock_guard<std::mutex> lock(r.mutex);
      auto spare = r.spare.find(data);
      if (spare != r.spare.end()) {
        p = reinterpret_cast<void*>(spare->second);
        r.spare_bytes -= data;
        r.spare.erase(spare);
      }
    }
    if (p == nullptr) {
      p = mmap(nullptr, total, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
      if (p == MAP_FAILED || mprotect(static_cast<char*>(p) + GUARD_BYTES, data, PROT_READ | PROT_WRITE) != 0) {
        if (p != MAP_FAILED) munmap(p, total);
        void* q = nullptr;  // out of mappings: an unguarded block rather than a failed allocation
        if (posix_memalign(&q, 64, n) != 0) throw std::bad_alloc();
        return {q, q, &release_plain, c10::Device(c10::DeviceType::CPU)};
      }
    }
    uintptr_t base = reinterpret_cast<uintptr_t>(p), lo = base + GUARD_BYTES, start = lo;
    std::lock_guard<std::mutex> lock(r.mutex);
    int forced = g_own_api.forced;
    if (forced == 1 || (forced < 0 && (mix(r.seed ^ r.count++) & 1))) {  // overflow mode: the data ends at the upper guard
      size_t align = std::min<size_t>(64, n & (~n + 1));
      start = (lo + data - n) & ~(uintptr_t)(align - 1);
    }
    r.by_start[start] = Mapping{base, total, start, n};
    // Never-written memory reads as 0xFF bytes (NaN for floating point), whether the mapping is
    // fresh (the kernel's zero pages) or reused (the last tensor's values, often right for the same
    // inputs): on a GPU it holds whatever the caching allocator's last user left.
    std::memset(reinterpret_cast<void*>(start), 0xFF, n);
    return {reinterpret_cast<void*>(start), reinterpret_cast<void*>(start), &release,
            c10::Device(c10::DeviceType::CPU)};
  }
  c10::DeleterFnPtr raw_deleter() const override { return &release; }
  void copy_data(void* dest, const void* src, std::size_t count) const override { std::memcpy(dest, src, count); }
};

inline bool describe(uintptr_t addr, bool write, char* out, size_t n) {
  Registry& r = registry();
  if (!r.mutex.try_lock()) return false;  // the fault interrupted the allocator itself
  bool found = false;
  auto next = r.by_start.upper_bound(addr);  // the mapping holding addr starts its data after it (underflow)
  for (int k = 0; k < 2 && !found; ++k) {    // or at or before it (overflow)
    if (k == 1) { if (next == r.by_start.begin()) break; --next; }
    if (next == r.by_start.end()) continue;
    const Mapping& m = next->second;
    if (addr >= m.base && addr < m.base + m.total && (addr < m.start || addr >= m.start + m.bytes)) {
      found = true;
      const char* what = write ? "write" : "read";
      if (addr >= m.start + m.bytes)
        std::snprintf(out, n, "out-of-bounds global %s at 0x%" PRIxPTR ", %zu bytes past the end of a %zu-byte "
                      "allocation (byte offset %zu)", what, addr, (size_t)(addr - m.start - m.bytes), m.bytes,
                      (size_t)(addr - m.start));
      else
        std::snprintf(out, n, "out-of-bounds global %s at 0x%" PRIxPTR ", %zu bytes before the start of a %zu-byte "
                      "allocation (byte offset -%zu)", what, addr, (size_t)(m.start - addr), m.bytes,
                      (size_t)(m.start - addr));
    }
  }
  r.mutex.unlock();
  return found;
}

// The process's guard allocator: installed by the first emulated extension loaded, found by the others.
inline Api* api() {
  static Api* found = [] () -> Api* {
    const char* env = std::getenv("AGENTFORGE_EMU_GUARD");
    if (env != nullptr && std::strcmp(env, "off") == 0) return nullptr;
    long pid = 0; uintptr_t addr = 0;
    if (env != nullptr && std::sscanf(env, "%ld:%" SCNxPTR, &pid, &addr) == 2 && pid == (long)getpid()) {
      Api* other = reinterpret_cast<Api*>(addr);
      return other->magic == MAGIC ? other : nullptr;
    }
    static Allocator allocator;
    c10::SetCPUAllocator(&allocator, 200);
    char value[64];
    std::snprintf(value, sizeof value, "%ld:%" PRIxPTR, (long)getpid(), reinterpret_cast<uintptr_t>(&g_own_api));
    setenv("AGENTFORGE_EMU_GUARD", value, 1);  // a child process sees another pid and installs its own
    return &g_own_api;
  }();
  return found;
}

struct Installer { Installer() { api(); } };
inline Installer g_installer;  // when the extension is loaded: before the candidate's tensors are made

}  // namespace emu::guard
