// Decodes gzipped pprof profiles with npm's pprof-format (an independent reader of
// `aclprof export --format pprof`): one JSON line per file given, with each sample's stack
// (leaf first, [function name, file name]), values (as decimal strings: int64) and labels.
"use strict";
const fs = require("fs");
const zlib = require("zlib");
const { Profile } = require("pprof-format");

for (const path of process.argv.slice(2)) {
  const p = Profile.decode(zlib.gunzipSync(fs.readFileSync(path)));
  const str = (i) => p.stringTable.strings[Number(i)];
  const fns = new Map(p.function.map((f) => [String(f.id), [str(f.name), str(f.filename)]]));
  const locs = new Map(p.location.map((l) => [String(l.id), l.line.map((ln) => fns.get(String(ln.functionId)))]));
  const out = {
    sampleTypes: p.sampleType.map((t) => [str(t.type), str(t.unit)]),
    defaultSampleType: str(p.defaultSampleType),
    samples: p.sample.map((s) => ({
      stack: s.locationId.flatMap((id) => locs.get(String(id))),
      values: s.value.map(String),
      labels: Object.fromEntries(s.label.map((l) => [str(l.key), str(l.str)])),
    })),
  };
  process.stdout.write(JSON.stringify(out) + "\n");
}
