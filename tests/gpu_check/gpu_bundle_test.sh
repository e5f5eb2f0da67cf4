#!/usr/bin/env bash
# ctest gpu.bundle (label "bundle"): gpu_check/gpu-bundle packs this build (no second build); the bundle
# fits in 64 MiB; a copy of it alone, run from another folder with a bare environment, finds every
# library but glibc's (and GCC's runtime, which it also carries) inside itself; its gpu-check says
# "no device" with exit status 77 here; and its dry run (docs/gpu.md's one command with --device sim
# --small) prints a GPU schedule that fits 8 minutes, passes every stage it can run without a GPU and
# packs its results into the one archive copied back. On a machine with a GPU the real check runs
# instead, at small shapes.
#   gpu_bundle_test.sh REPO BUILD VOCAB
set -euo pipefail
repo="$1" build="$2" vocab="$3"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }

"$repo/gpu_check/gpu-bundle" "$tmp/made" --build-dir "$build" --vocab "$vocab"
size=$(du -sb "$tmp/made" | cut -f1)
echo "bundle: $size bytes"
[ "$size" -le $((64 << 20)) ] || fail "the bundle is $size bytes, over 64 MiB"
for f in gpu-check README share/MANIFEST share/glibc-needed share/ggml-vocab-llama-spm.gguf bin/hotcold bin/hotcold-gpu-check bin/test_actors bin/test_devices lib/cxx/libstdc++.so.6; do
  [ -e "$tmp/made/$f" ] || fail "the bundle has no $f"
done
cp -a "$tmp/made" "$tmp/alone"
rm -rf "$tmp/made"
mkdir "$tmp/elsewhere"
cd "$tmp/elsewhere"
bare=(env -i PATH=/usr/bin:/bin HOME="$tmp")

# Every library resolves inside the bundle, but glibc's own and GCC's runtime (the machine's here).
outside="$(for b in "$tmp"/alone/bin/*; do ldd "$b"; done | awk '$2 == "=>" { print $1, $3 }' | grep -v " $tmp/alone/" |
  grep -Ev '^(libc|libm|libmvec|libpthread|libdl|librt|libresolv|libutil|libstdc\+\+|libgcc_s)\.so' || true)"
[ -z "$outside" ] || fail "libraries found outside the bundle: $outside"
"${bare[@]}" "$tmp/alone/bin/hotcold" --version | grep -q hotcold || fail "hotcold does not start from the bundle"
# And with the bundle's own libstdc++ (the way a machine without a new enough one runs it).
"${bare[@]}" LD_LIBRARY_PATH="$tmp/alone/lib/cxx" "$tmp/alone/bin/hotcold" --version >/dev/null || fail "hotcold does not start with the bundle's libstdc++"
[ "$(LD_LIBRARY_PATH="$tmp/alone/lib/cxx" ldd "$tmp/alone/bin/hotcold" | awk '$1 == "libstdc++.so.6" { print $3 }')" = "$tmp/alone/lib/cxx/libstdc++.so.6" ] ||
  fail "LD_LIBRARY_PATH=lib/cxx does not pick the bundle's libstdc++"

set +e
"${bare[@]}" "$tmp/alone/gpu-check" --work w >out.txt 2>&1
status=$?
set -e
cat out.txt
if [ "$status" -eq 77 ]; then
  grep -q '^gpu-check: no device: ' out.txt || fail "no 'gpu-check: no device: ...' line"
  grep -q '^outcome: no device (exit status 77)$' out.txt || fail "no outcome line"
  python3 -c 'import json,sys; j=json.load(open("w/gpu-check.json")); assert j["outcome"] == "no device" and j["exit_status"] == 77, j' ||
    fail "the JSON does not say no device"
  GPU_CHECK_BUNDLED_CXX=1 "${bare[@]}" "$tmp/alone/gpu-check" --work w >/dev/null 2>&1 && fail "exit status 0 without a device" || [ $? -eq 77 ] ||
    fail "with the bundle's libstdc++: not the no-device status"
  # The dry run: stages 2 and 3 on sim's GPU-like kernels, at small shapes — by docs/gpu.md's one
  # command (--device sim --small added), its archive copied back as the device tool would.
  mkdir copied-back
  set +e
  "${bare[@]}" bash -c "'$tmp/alone/gpu-check' --minutes 8 --work dry --device sim --small -t 2; status=\$?; cp dry/gpu-check-results.tar.gz copied-back/; exit \$status" >dry.txt 2>&1
  status=$?
  set -e
  cat dry.txt
  [ "$status" -eq 0 ] || fail "the dry run's exit status is $status, not 0"
  # The GPU schedule, printed before the first stage: a full run's, fitting its 8 minutes.
  sed -n '/^GPU schedule/,/^the whole check/p' dry.txt | grep -q '^the whole check .* 480s  fits$' || fail "no GPU schedule that fits 8 minutes before the stages"
  [ "$(grep -n '^GPU schedule' dry.txt | cut -d: -f1)" -lt "$(grep -n '^== stage 1' dry.txt | cut -d: -f1)" ] || fail "the schedule comes after the stages began"
  mkdir unpacked
  tar -xzf copied-back/gpu-check-results.tar.gz -C unpacked || fail "the archive does not unpack"
  for f in gpu-check.json check-0.json check-5.json bench-0.out; do [ -s "unpacked/$f" ] || fail "the archive has no $f"; done
  listing="$(tar -tzf copied-back/gpu-check-results.tar.gz)"
  ! grep -q '\.gguf$' <<<"$listing" || fail "the archive holds a model"
  python3 - <<'PY' || fail "the dry run's JSON"
import json
j = json.load(open("unpacked/gpu-check.json"))
s = j["schedule"]
assert s["fits"] and s["limit_s"] == 480 and 0 < s["estimate_s"] <= 480, s
assert [st["within_share"] for st in s["stages"]] == [True, True, True], s["stages"]
assert s["cpu_cores"] == 16 and s["gpu_gb_per_s"] == 3350, s
assert j["speed_verdict"] == "ok" and j["archive"].endswith("gpu-check-results.tar.gz"), j
assert j["outcome"] == "ok", j["outcome"]
assert [s["status"] for s in j["stages"]] == ["skipped: --device sim (the kernels need a GPU)", "passed", "passed"], j["stages"]
checks = j["hybrid_checks"]
assert len(checks) == 6 and all(c["passed"] for c in checks), checks
deep = checks[5]
assert deep["name"].startswith("depth") and deep["positions"] >= 300, deep  # (decode steps past 128 positions: split on a GPU)
assert all(0 < c["rel_rms"] <= c["limit"] and 0 < c["cpu_rel_rms"] and c["top1_same"] == c["positions"] > 0 for c in checks), checks
speed = j["speed"]
assert len(speed) == 10 and all(r["status"] == "measured" and r["decode_tokens_per_s"] > 0 and r["prefill_tokens_per_s"] > 0 for r in speed), speed
cpu = next(r for r in speed if r["configuration"] == "CPU only, sparse")
assert cpu["device_bytes_per_token"] == 0 and "predicted_decode_tokens_per_s" in cpu, cpu
spinning = next(r for r in speed if r["configuration"] == "hybrid, 25%, spinning waits")
assert spinning["device_wait"] == "spin", spinning
hybrid = next(r for r in speed if r["configuration"] == "hybrid, 50% in VRAM")
assert hybrid["device_bytes_per_token"] > 0 and hybrid["host_bytes_per_token"] < cpu["host_bytes_per_token"], hybrid
print("dry run: the schedule fits 8 minutes; 6 hybrid checks passed (a mixture of experts, 300+ positions among them), 10 speed rows measured; one archive")
PY
else
  # A GPU is here: the real check, at small shapes.
  "${bare[@]}" "$tmp/alone/gpu-check" --small --minutes 6 --work real || fail "gpu-check on this machine's GPU: exit status $?"
fi
echo "PASS gpu.bundle"
