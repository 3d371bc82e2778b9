package gpu

import (
	"strconv"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

// NVML is the part of go-nvml the collector uses. nvml.Interface satisfies
// it, and so does go-nvml's pkg/nvml/mock, which the unit tests use. Keeping
// it narrow documents exactly which library entry points the agent needs
// (see requiredSymbols).
type NVML interface {
	Init() nvml.Return
	Shutdown() nvml.Return
	DeviceGetCount() (int, nvml.Return)
	DeviceGetHandleByIndex(int) (nvml.Device, nvml.Return)
	GpmSampleAlloc() (nvml.GpmSample, nvml.Return)
	GpmMetricsGet(*nvml.GpmMetricsGetType) nvml.Return
	Extensions() nvml.ExtendedInterface
}

// go-nvml calls C functions through symbols resolved lazily in the dlopened
// library: calling one the installed driver lacks kills the process ("symbol
// lookup error"), it does not return an error. So New checks every symbol a
// poll may reach, and turns off a feature whose symbols are missing instead
// of calling it. The stand-in library (nvmlstub) exports exactly these.
var (
	requiredSymbols = []string{
		"nvmlInit_v2", "nvmlShutdown", "nvmlErrorString",
		"nvmlDeviceGetCount_v2", "nvmlDeviceGetHandleByIndex_v2",
		"nvmlDeviceGetName", "nvmlDeviceGetUUID", "nvmlDeviceGetMinorNumber", "nvmlDeviceGetPciInfo_v3",
		"nvmlDeviceGetUtilizationRates", "nvmlDeviceGetMemoryInfo", "nvmlDeviceGetPowerUsage",
		"nvmlDeviceGetTemperature", "nvmlDeviceGetClockInfo",
		// v3 is the first with the MIG GPU-instance id of each process.
		"nvmlDeviceGetComputeRunningProcesses_v3", "nvmlDeviceGetProcessUtilization",
	}
	migSymbols = []string{
		"nvmlDeviceGetMigMode", "nvmlDeviceGetMaxMigDeviceCount", "nvmlDeviceGetMigDeviceHandleByIndex",
		"nvmlDeviceGetGpuInstanceId", "nvmlDeviceGetComputeInstanceId",
	}
	gpmSymbols = []string{
		"nvmlGpmQueryDeviceSupport", "nvmlGpmSampleAlloc", "nvmlGpmSampleFree",
		"nvmlGpmSampleGet", "nvmlGpmMigSampleGet", "nvmlGpmMetricsGet",
	}
)

// Symbols lists every NVML symbol the collector may call, so a test can
// hold a stand-in library to it.
func Symbols() []string {
	out := append([]string(nil), requiredSymbols...)
	out = append(out, migSymbols...)
	return append(out, gpmSymbols...)
}

func missingSymbols(x nvml.ExtendedInterface, names []string) []string {
	var miss []string
	for _, n := range names {
		if x.LookupSymbol(n) != nil {
			miss = append(miss, n)
		}
	}
	return miss
}

// retName names a return code by its constant, so the error label has a
// small, fixed set of values whatever nvmlErrorString of the installed
// driver says.
func retName(r nvml.Return) string {
	switch r {
	case nvml.SUCCESS:
		return "SUCCESS"
	case nvml.ERROR_UNINITIALIZED:
		return "ERROR_UNINITIALIZED"
	case nvml.ERROR_INVALID_ARGUMENT:
		return "ERROR_INVALID_ARGUMENT"
	case nvml.ERROR_NOT_SUPPORTED:
		return "ERROR_NOT_SUPPORTED"
	case nvml.ERROR_NO_PERMISSION:
		return "ERROR_NO_PERMISSION"
	case nvml.ERROR_NOT_FOUND:
		return "ERROR_NOT_FOUND"
	case nvml.ERROR_INSUFFICIENT_SIZE:
		return "ERROR_INSUFFICIENT_SIZE"
	case nvml.ERROR_DRIVER_NOT_LOADED:
		return "ERROR_DRIVER_NOT_LOADED"
	case nvml.ERROR_TIMEOUT:
		return "ERROR_TIMEOUT"
	case nvml.ERROR_LIBRARY_NOT_FOUND:
		return "ERROR_LIBRARY_NOT_FOUND"
	case nvml.ERROR_FUNCTION_NOT_FOUND:
		return "ERROR_FUNCTION_NOT_FOUND"
	case nvml.ERROR_GPU_IS_LOST:
		return "ERROR_GPU_IS_LOST"
	case nvml.ERROR_RESET_REQUIRED:
		return "ERROR_RESET_REQUIRED"
	case nvml.ERROR_LIB_RM_VERSION_MISMATCH:
		return "ERROR_LIB_RM_VERSION_MISMATCH"
	case nvml.ERROR_MEMORY:
		return "ERROR_MEMORY"
	case nvml.ERROR_NO_DATA:
		return "ERROR_NO_DATA"
	case nvml.ERROR_ARGUMENT_VERSION_MISMATCH:
		return "ERROR_ARGUMENT_VERSION_MISMATCH"
	case nvml.ERROR_UNKNOWN:
		return "ERROR_UNKNOWN"
	}
	return "ERROR_" + strconv.Itoa(int(r))
}

// noInstance is what NVML reports as the GPU-instance id of a process on a
// GPU without MIG (and for every process through the v1 process API).
const noInstance = 0xFFFFFFFF
