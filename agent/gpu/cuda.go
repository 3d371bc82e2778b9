package gpu

import (
	"strconv"

	"github.com/slurmscope/slurmscope/agent/profiles"
	"github.com/slurmscope/slurmscope/schema"
)

// deviceSnapshot is what the last poll knew of the node's GPUs; it is never
// modified once stored.
type deviceSnapshot struct {
	units map[unitKey]*unit
	topo  topology
}

// CUDADevice returns the labels (gpu_uuid, gpu_index, gpu_name, and the MIG
// profile and instance for a MIG instance) of the GPU that CUDA device
// ordinal stands for in a process whose environment holds env (EnvKeys),
// from the last poll. It answers only when that is certain: the ordinal
// picks a UUID entry of CUDA_VISIBLE_DEVICES, or the task was given exactly
// one GPU and the ordinal is 0. Otherwise, and before the first poll, nil.
func (c *Collector) CUDADevice(env map[string]string, ordinal uint32) []profiles.Label {
	snap := c.devs.Load()
	if snap == nil {
		return nil
	}
	var key unitKey
	found := false
	if refs, err := parseGPUList(env[EnvVisibleGPUs]); err == nil && int64(ordinal) < int64(len(refs)) && refs[ordinal].ordinal < 0 {
		r := refs[ordinal]
		if r.gi >= 0 {
			if u, ok := snap.topo.byUUID[r.uuid]; ok {
				key, found = unitKey{u.uuid, r.gi}, true
			}
		} else if u, ok := snap.topo.byUUID[r.uuid]; ok {
			key, found = u, true
		}
	} else if ordinal == 0 {
		var units []unitKey
		snap.topo.resolve(parseTaskEnv(env), func(k unitKey) { units = append(units, k) }, func(string) {})
		if len(units) == 1 {
			key, found = units[0], true
		}
	}
	if !found {
		return nil
	}
	u := snap.units[key]
	if u == nil {
		return nil
	}
	names := []string{schema.GPUUUID.Label, schema.GPUIndex.Label, schema.GPUName.Label,
		schema.GPUMIGProfile.Label, schema.GPUMIGInstance.Label}
	var out []profiles.Label
	for i, v := range u.labels {
		if i < len(names) && v != "" {
			out = append(out, profiles.Label{Name: names[i], Value: v})
		}
	}
	return out
}

// VisibleIndex is the fallback where NVML is not available: the GPU index
// that CUDA device ordinal stands for when the process's
// CUDA_VISIBLE_DEVICES (in env) is a list of ordinals, as a gpu_index
// label; nil when it is unset, malformed, holds UUIDs or is too short.
func VisibleIndex(env map[string]string, ordinal uint32) []profiles.Label {
	v, ok := env[EnvVisibleGPUs]
	if !ok {
		return nil
	}
	refs, err := parseGPUList(v)
	if err != nil || int64(ordinal) >= int64(len(refs)) || refs[ordinal].ordinal < 0 {
		return nil
	}
	return []profiles.Label{{Name: schema.GPUIndex.Label, Value: strconv.Itoa(refs[ordinal].ordinal)}}
}
