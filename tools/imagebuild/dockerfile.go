package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"regexp"
	"strings"
)

// runtimeStage is what the Dockerfile's final stage says about the image:
// the Dockerfile is the one home of the image's user, entrypoint, ports and
// labels, so the image built here without Docker and the one `docker build`
// makes describe themselves alike.
type runtimeStage struct {
	User       string            // USER, numeric uid:gid
	Entrypoint []string          // ENTRYPOINT, exec form
	Ports      []string          // EXPOSE, each "port/proto"
	Labels     map[string]string // LABEL, with ${VAR} expanded
	Binary     string            // where the COPY from the builder puts the binary
}

// readRuntimeStage parses the final stage of the Dockerfile at path,
// expanding ${VAR} in labels from vars (an unknown variable is an error:
// a label must never silently read "").
func readRuntimeStage(path string, vars map[string]string) (runtimeStage, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return runtimeStage{}, err
	}
	instrs, err := instructions(bytes.NewReader(data))
	if err != nil {
		return runtimeStage{}, fmt.Errorf("%s: %w", path, err)
	}
	st, err := finalStage(instrs, vars)
	if err != nil {
		return runtimeStage{}, fmt.Errorf("%s: %w", path, err)
	}
	return st, nil
}

// instruction is one Dockerfile instruction: its keyword (upper case) and
// the rest of its logical line.
type instruction struct {
	keyword, args string
}

// instructions splits a Dockerfile into logical lines: comments and blank
// lines dropped, backslash continuations joined (the default escape
// character; the Dockerfile sets no other).
func instructions(r io.Reader) ([]instruction, error) {
	var out []instruction
	var pending strings.Builder
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		if cont, ok := strings.CutSuffix(line, `\`); ok {
			pending.WriteString(cont + " ")
			continue
		}
		pending.WriteString(line)
		keyword, args, _ := strings.Cut(pending.String(), " ")
		out = append(out, instruction{strings.ToUpper(keyword), strings.TrimSpace(args)})
		pending.Reset()
	}
	if pending.Len() > 0 {
		return nil, fmt.Errorf("continuation at the end of the file")
	}
	return out, sc.Err()
}

// finalStage reads the instructions from the last FROM on.
func finalStage(instrs []instruction, vars map[string]string) (runtimeStage, error) {
	last := -1
	for i, in := range instrs {
		if in.keyword == "FROM" {
			last = i
		}
	}
	if last < 0 {
		return runtimeStage{}, fmt.Errorf("no FROM")
	}
	st := runtimeStage{Labels: map[string]string{}}
	for _, in := range instrs[last+1:] {
		if err := st.apply(in, vars); err != nil {
			return runtimeStage{}, fmt.Errorf("%s %s: %w", in.keyword, in.args, err)
		}
	}
	return st, st.complete()
}

// apply records one instruction of the runtime stage. Instructions that do
// not describe the image's metadata (ARG) are skipped; anything that would
// change the image in a way this tool does not reproduce is refused.
func (st *runtimeStage) apply(in instruction, vars map[string]string) error {
	switch in.keyword {
	case "ARG":
		return nil
	case "USER":
		st.User = in.args
	case "EXPOSE":
		for _, p := range strings.Fields(in.args) {
			if !strings.Contains(p, "/") {
				p += "/tcp"
			}
			st.Ports = append(st.Ports, p)
		}
	case "ENTRYPOINT":
		if err := json.Unmarshal([]byte(in.args), &st.Entrypoint); err != nil {
			return fmt.Errorf("want the exec form [\"...\"]: %w", err)
		}
	case "LABEL":
		return st.addLabels(in.args, vars)
	case "COPY":
		fields := strings.Fields(in.args)
		if len(fields) < 3 || !strings.HasPrefix(fields[0], "--from=") {
			return fmt.Errorf("want COPY --from=<builder> <binary> <dest>")
		}
		st.Binary = fields[len(fields)-1]
	default:
		return fmt.Errorf("not reproduced by imagebuild: teach it, or keep the runtime stage to USER, EXPOSE, ENTRYPOINT, LABEL, ARG and one COPY")
	}
	return nil
}

// labelPair is one key=value of a LABEL, the value optionally double-quoted.
var labelPair = regexp.MustCompile(`^([A-Za-z0-9._-]+)=("([^"]*)"|\S*)\s*`)

func (st *runtimeStage) addLabels(args string, vars map[string]string) error {
	for rest := args; rest != ""; {
		m := labelPair.FindStringSubmatch(rest)
		if m == nil {
			return fmt.Errorf("cannot read label %q", rest)
		}
		value := m[2]
		if strings.HasPrefix(value, `"`) {
			value = m[3]
		}
		expanded, err := expand(value, vars)
		if err != nil {
			return err
		}
		st.Labels[m[1]] = expanded
		rest = rest[len(m[0]):]
	}
	return nil
}

var variable = regexp.MustCompile(`\$\{([A-Za-z_][A-Za-z0-9_]*)\}`)

// expand substitutes ${VAR} from vars.
func expand(s string, vars map[string]string) (string, error) {
	var missing []string
	out := variable.ReplaceAllStringFunc(s, func(ref string) string {
		name := variable.FindStringSubmatch(ref)[1]
		v, ok := vars[name]
		if !ok {
			missing = append(missing, name)
		}
		return v
	})
	if missing != nil {
		return "", fmt.Errorf("no value for %v (pass it to imagebuild)", missing)
	}
	return out, nil
}

// complete checks that the stage says everything an image needs.
func (st runtimeStage) complete() error {
	switch {
	case st.User == "":
		return fmt.Errorf("runtime stage has no USER")
	case len(st.Entrypoint) == 0:
		return fmt.Errorf("runtime stage has no ENTRYPOINT")
	case st.Binary == "":
		return fmt.Errorf("runtime stage copies no binary")
	case st.Entrypoint[0] != st.Binary:
		return fmt.Errorf("ENTRYPOINT %v does not run the copied binary %s", st.Entrypoint, st.Binary)
	}
	return nil
}
