// readme_example.cpp: the rendezvous and mesh_reduce example of docs/api.md, built and run by
// the suite so that the example stays true.
#include <xspawn/xspawn.hpp>

int main() {
  xs::SpawnOptions options;
  options.flags.set("lr", 0.01);
  options.quiet = true;
  xs::JobResult job = xs::spawn([](int index, const xs::Flags& flags) {
    xs::rendezvous("init");                              // a named, checked meeting point
    double loss = 1.0 / (index + 1);
    double mean = xs::mesh_reduce("loss", loss, [](const std::vector<double>& v) {
      double s = 0; for (double x : v) s += x; return s / v.size();
    });
    xs::master_print("mean loss {:.3f} over {} cores", mean, xs::world_size());
  }, 8, options);
  return job.exitCode;   // the report was printed on stderr if a rank failed
}
