// xspawn.hpp: the API a worker uses, modelled on torch_xla's xmp/xm: who am I (ordinal,
// world size, master, the emulated core I own), named rendezvous points with payloads,
// mesh_reduce, barrier, master_print; plus spawn/run (spawn.hpp).
#pragma once

#include <cstring>
#include <exception>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include <fmt/format.h>

#include "xspawn/error.hpp"
#include "xspawn/flags.hpp"
#include "xspawn/spawn.hpp"

namespace xs {

// The emulated accelerator core a worker owns.
struct DeviceInfo {
  std::string name;      // "xcore:3": shows the ordinal, as "TPU:3" does on a TPU host
  int ordinal = 0;       // global ordinal of the core (= the rank)
  int localOrdinal = 0;  // ordinal on this machine
  int cpu = -1;          // the CPU it is bound to, -1 when not bound
};

// Attaches this process to its job (from the XSPAWN_* environment set by the launcher).
// Outside xspawn it makes a world of one, so a program also runs on its own. Idempotent.
void init();
// Whether this process is attached (init() ran, or xs::spawn runs it as a worker). The calls
// below throw NotInitializedError before that.
bool initialized();

// This rank's global ordinal (torch_xla's xm.get_ordinal), 0 .. world_size() - 1.
int get_ordinal();
// This rank's ordinal on its machine, 0 .. local_world_size() - 1.
int get_local_ordinal();
// The ranks of the job, and of this machine (the same on one machine).
int world_size();
int local_world_size();
// The master of the machine (local = true) or of the whole job (local = false).
bool is_master_ordinal(bool local = true);
// This worker's emulated core.
const DeviceInfo& device();
// The job's id, as the launcher printed it ("standalone" outside a job).
const std::string& job_id();
// How many times the job's gang was restarted before this worker started (0: the first
// start; see SpawnOptions::maxRestarts and --max-restarts), as torchrun's
// TORCHELASTIC_RESTART_COUNT: a program resumes from its own checkpoint when it is > 0.
int restart_count();

// Records `error` as this rank's fatal error for the launcher's root-cause report (what an
// exception escaping a worker function gets by itself under xs::spawn), for a program whose
// own main catches its errors and returns an exit code. Marked secondary when it is the job's
// abort caused by another rank. Does nothing outside a job.
void record_error(std::exception_ptr error);

// Prints a line on the master ordinal only.
void master_print(std::string_view line);
template <class... Args>
void master_print(fmt::format_string<Args...> format, Args&&... args) {
  if (is_master_ordinal(false)) master_print(std::string_view(fmt::format(format, std::forward<Args>(args)...)));
}

// A named meeting point: returns once every rank reached `tag`, with every rank's payload in
// rank order. Ranks that reach different tags fail at once (DivergenceError) saying who is
// where; past the deadline (--timeout) it fails with TimeoutError listing every rank's last
// tag; a peer that died makes it fail with AbortedError naming the peer.
std::vector<std::string> rendezvous(std::string_view tag, std::string_view payload = {});
// A rendezvous without payloads.
void barrier(std::string_view tag = "barrier");

// Rendezvous with `value` from every rank, then reduce_fn: either over the whole list
// (reduce_fn(const std::vector<T>&)) or pairwise in rank order (reduce_fn(T, T)).
// T: trivially copyable, std::string, or std::vector of trivially copyable.
template <class T, class ReduceFn>
auto mesh_reduce(std::string_view tag, const T& value, ReduceFn reduce_fn);

namespace detail {
template <class T>
std::string encodeValue(const T& v) {
  if constexpr (std::is_same_v<T, std::string>) {
    return v;
  } else if constexpr (std::is_trivially_copyable_v<T>) {
    return std::string(reinterpret_cast<const char*>(&v), sizeof v);
  } else {
    using E = typename T::value_type;
    static_assert(std::is_trivially_copyable_v<E>, "mesh_reduce: unsupported value type");
    return std::string(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(E));
  }
}
template <class T>
T decodeValue(const std::string& bytes) {
  if constexpr (std::is_same_v<T, std::string>) {
    return bytes;
  } else if constexpr (std::is_trivially_copyable_v<T>) {
    if (bytes.size() != sizeof(T)) XS_THROW(DivergenceError, "mesh_reduce: ranks passed values of different sizes");
    T v;
    std::memcpy(&v, bytes.data(), sizeof v);
    return v;
  } else {
    using E = typename T::value_type;
    T v(bytes.size() / sizeof(E));
    std::memcpy(v.data(), bytes.data(), v.size() * sizeof(E));
    return v;
  }
}
}  // namespace detail

template <class T, class ReduceFn>
auto mesh_reduce(std::string_view tag, const T& value, ReduceFn reduce_fn) {
  std::vector<std::string> all = rendezvous(tag, detail::encodeValue(value));
  std::vector<T> values;
  values.reserve(all.size());
  for (const std::string& bytes : all) values.push_back(detail::decodeValue<T>(bytes));
  if constexpr (std::is_invocable_v<ReduceFn&, const std::vector<T>&>) {
    return reduce_fn(values);
  } else {
    T acc = values[0];
    for (std::size_t i = 1; i < values.size(); ++i) acc = reduce_fn(acc, values[i]);
    return acc;
  }
}

}  // namespace xs
