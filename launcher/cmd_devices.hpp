#pragma once
// hotcold devices: what this machine can compute on.

namespace hotcold::launcher {

void run_devices();

}  // namespace hotcold::launcher
