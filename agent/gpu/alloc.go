package gpu

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// Environment variables that say which GPUs a job's task was given. They
// are the user's to change, so they only narrow what Slurm granted (see
// Grants).
//
// SLURM_JOB_GPUS and SLURM_STEP_GPUS hold Slurm's global GPU ids, the
// devices gres.conf names (File=/dev/nvidiaN), so they are matched to the
// GPU's minor number, not to the NVML index, which may differ. With
// ConstrainDevices, CUDA_VISIBLE_DEVICES holds ordinals relative to the
// task's device cgroup (always 0..n-1), which name no physical GPU: only
// its UUID entries are used (Slurm 25.11 writes UUIDs; MIG instances always
// appear as MIG-... UUIDs).
const (
	EnvJobGPUs     = "SLURM_JOB_GPUS"
	EnvStepGPUs    = "SLURM_STEP_GPUS"
	EnvVisibleGPUs = "CUDA_VISIBLE_DEVICES"
)

// EnvKeys are the variables the collector reads from a task's environment.
var EnvKeys = []string{EnvJobGPUs, EnvStepGPUs, EnvVisibleGPUs}

// Limits on what one variable may name; real nodes have at most a few dozen
// GPUs and MIG instances.
const (
	maxRefs    = 256
	maxOrdinal = 4096
	maxRefLen  = 128
)

// gpuRef is one entry of a GPU list: an ordinal or a UUID.
type gpuRef struct {
	ordinal int // -1 for a UUID
	uuid    string
	// For the old (R450-R465) MIG form MIG-GPU-<uuid>/<gi>/<ci>: the
	// parent's UUID is uuid and gi the GPU-instance id; -1 otherwise.
	gi int
}

var errMalformed = errors.New("malformed GPU list")

// parseGPUList parses a comma-separated list of ordinals ("0,1"; Slurm
// itself never writes ranges, but "0-3" is accepted), GPU-/MIG- UUIDs, or
// a mix. "NoDevFiles" and the empty string mean none. Values come from a
// process environment the job's user controls: anything else is an error
// naming the bad entry, and nothing from the variable is used.
func parseGPUList(s string) ([]gpuRef, error) {
	s = strings.TrimSpace(s)
	if s == "" || s == "NoDevFiles" || s == "none" {
		return nil, nil
	}
	var out []gpuRef
	for entry := range strings.SplitSeq(s, ",") {
		e := strings.TrimSpace(entry)
		if len(out) >= maxRefs {
			return nil, fmt.Errorf("%w: more than %d entries", errMalformed, maxRefs)
		}
		switch {
		case e == "":
			return nil, fmt.Errorf("%w: empty entry", errMalformed)
		case strings.HasPrefix(e, "GPU-") || strings.HasPrefix(e, "MIG-"):
			r, err := parseUUID(e)
			if err != nil {
				return nil, err
			}
			out = append(out, r)
		default:
			lo, hi, isRange := strings.Cut(e, "-")
			a, err := parseOrdinal(lo)
			if err != nil {
				return nil, fmt.Errorf("%w: entry %s: neither an ordinal nor a GPU-/MIG- UUID", errMalformed, quote(e))
			}
			b := a
			if isRange {
				if b, err = parseOrdinal(hi); err != nil || b < a || b-a > maxRefs {
					return nil, fmt.Errorf("%w: bad range %s", errMalformed, quote(e))
				}
			}
			for i := a; i <= b; i++ {
				if len(out) >= maxRefs {
					return nil, fmt.Errorf("%w: more than %d entries", errMalformed, maxRefs)
				}
				out = append(out, gpuRef{ordinal: i, gi: -1})
			}
		}
	}
	return out, nil
}

func parseOrdinal(s string) (int, error) {
	if s == "" || len(s) > 4 {
		return 0, errMalformed
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 0 || n > maxOrdinal || strconv.Itoa(n) != s {
		return 0, errMalformed
	}
	return n, nil
}

func parseUUID(e string) (gpuRef, error) {
	if len(e) > maxRefLen {
		return gpuRef{}, fmt.Errorf("%w: UUID entry longer than %d bytes", errMalformed, maxRefLen)
	}
	r := gpuRef{ordinal: -1, uuid: e, gi: -1}
	body := e[4:]
	if rest, ok := strings.CutPrefix(e, "MIG-GPU-"); ok {
		// MIG-GPU-<parent uuid>/<gi>/<ci>
		parts := strings.Split(rest, "/")
		if len(parts) != 3 {
			return gpuRef{}, fmt.Errorf("%w: entry %s: want MIG-GPU-<uuid>/<gi>/<ci>", errMalformed, quote(e))
		}
		gi, err1 := parseOrdinal(parts[1])
		_, err2 := parseOrdinal(parts[2])
		if err1 != nil || err2 != nil || !isUUIDBody(parts[0]) {
			return gpuRef{}, fmt.Errorf("%w: entry %s: want MIG-GPU-<uuid>/<gi>/<ci>", errMalformed, quote(e))
		}
		r.uuid, r.gi = "GPU-"+parts[0], gi
		return r, nil
	}
	if !isUUIDBody(body) {
		return gpuRef{}, fmt.Errorf("%w: entry %s: not a UUID", errMalformed, quote(e))
	}
	return r, nil
}

// isUUIDBody accepts hex digits and dashes, which is all NVML prints. (CUDA
// also accepts a unique UUID prefix; Slurm never writes one, so neither do we.)
func isUUIDBody(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f' || c >= 'A' && c <= 'F' || c == '-') {
			return false
		}
	}
	return true
}

// quote shows a hostile value safely and briefly in an error.
func quote(s string) string {
	if len(s) > 64 {
		s = s[:64] + "..."
	}
	return strconv.QuoteToASCII(s)
}

// taskAlloc is what one task's environment says about its GPUs.
type taskAlloc struct {
	ordinals []int    // Slurm global ids (SLURM_STEP_GPUS, SLURM_JOB_GPUS)
	uuids    []gpuRef // UUID entries of CUDA_VISIBLE_DEVICES (and of the Slurm variables, should they hold any)
	errs     []error
}

func parseTaskEnv(env map[string]string) taskAlloc {
	var a taskAlloc
	for _, k := range []string{EnvStepGPUs, EnvJobGPUs, EnvVisibleGPUs} {
		v, ok := env[k]
		if !ok {
			continue
		}
		refs, err := parseGPUList(v)
		if err != nil {
			a.errs = append(a.errs, fmt.Errorf("%s: %w", k, err))
			continue
		}
		for _, r := range refs {
			switch {
			case r.ordinal < 0:
				a.uuids = append(a.uuids, r)
			case k != EnvVisibleGPUs:
				a.ordinals = append(a.ordinals, r.ordinal)
			}
			// Ordinals in CUDA_VISIBLE_DEVICES are relative to the
			// task's cgroup: ignored, see EnvVisibleGPUs.
		}
	}
	return a
}

// unitKey names a GPU or one MIG instance on this node.
type unitKey struct {
	uuid string // the physical GPU's UUID
	gi   int    // MIG GPU-instance id; -1 for the whole GPU
}

// topology is what the allocation mapping needs to know about the node.
type topology struct {
	byMinor    map[int]string     // minor number -> GPU UUID
	byUUID     map[string]unitKey // GPU and MIG UUIDs -> unit
	migEnabled map[string]bool    // GPU UUID -> MIG mode on
	units      map[unitKey]bool   // every GPU and MIG instance present
	anyMIG     bool
}

// Reasons an allocation entry is not used, for the error counter.
const (
	reasonMalformed = "malformed"
	reasonUnknown   = "unknown_gpu"
	reasonAmbiguous = "ambiguous_ordinal"
	// A task names a GPU Slurm did not give its job.
	reasonOutsideGrant = "outside_grant"
	// No source (device cgroup, slurmctld) says what the job holds.
	reasonNoGrant = "grant_unknown"
	// A GPU's device file (or the MIG capability table) is missing.
	reasonNoDeviceFile = "no_device_file"
)

// allocReasons are exported even at zero, so that rate() sees the first.
var allocReasons = []string{reasonMalformed, reasonUnknown, reasonAmbiguous, reasonOutsideGrant, reasonNoGrant, reasonNoDeviceFile}

// resolve maps a task's references to units. Ordinals are refused when any
// GPU has MIG on: Slurm then numbers MIG instances and GPUs together in an
// order only its gres.conf knows, and a wrong guess would blame one job's
// idle GPU on another. UUIDs are exact.
func (t *topology) resolve(a taskAlloc, add func(unitKey), fail func(reason string)) {
	for range a.errs {
		fail(reasonMalformed)
	}
	for _, o := range a.ordinals {
		if t.anyMIG {
			fail(reasonAmbiguous)
			continue
		}
		uuid, ok := t.byMinor[o]
		if !ok {
			fail(reasonUnknown)
			continue
		}
		add(unitKey{uuid, -1})
	}
	for _, r := range a.uuids {
		if r.gi >= 0 { // MIG-GPU-<uuid>/<gi>/<ci>
			if u, ok := t.byUUID[r.uuid]; ok && t.units[unitKey{u.uuid, r.gi}] {
				add(unitKey{u.uuid, r.gi})
				continue
			}
			fail(reasonUnknown)
			continue
		}
		if u, ok := t.byUUID[r.uuid]; ok {
			add(u)
			continue
		}
		fail(reasonUnknown)
	}
}
