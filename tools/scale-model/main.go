// Command scale-model is the fleet cost model of docs/scale.md. It reads
// the unit costs measured by BenchmarkCostModel (tools/bench/model_test.go)
// and the fleet simulation (BenchmarkScaleSim, tools/scale), predicts what
// each simulated fleet should have cost, and writes the comparison, the
// capacity answers and a plot. From tools/ (make scale-sim runs it):
//
//	go run ./scale-model   # defaults: results/{model,latest,scale}.txt → ../docs/scale/{table.md,scale.png}
//
// The inputs come from the first -inputs file that holds BenchmarkCostModel
// lines: model.txt, which `make scale-sim` writes itself, else latest.txt
// after `make bench`.
package main

import (
	"bytes"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/sidelock/sidelock/tools/benchread"
)

func main() {
	if err := run(os.Args[1:], os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "scale-model:", err)
		os.Exit(1)
	}
}

// options are the command line.
type options struct {
	inputs         []string
	sim            string
	png, table     string
	current        Settings
	recommended    Settings
	fleetPods      float64
	fleetCycles    float64
	plotMaxSidecar float64
}

func parseOptions(args []string, stderr io.Writer) (options, error) {
	fs := flag.NewFlagSet("scale-model", flag.ContinueOnError)
	fs.SetOutput(stderr)
	inputs := fs.String("inputs", "results/model.txt,results/latest.txt", "benchmark outputs to take the model's inputs from: the first with BenchmarkCostModel lines (a real sidecar's RSS from any)")
	sim := fs.String("sim", "results/scale.txt", "BenchmarkScaleSim output")
	png := fs.String("png", "../docs/scale/scale.png", "where to write the plot")
	table := fs.String("table", "../docs/scale/table.md", "where to write the tables")
	budget := fs.Float64("cpu-budget", 0.5, "share of one core a master may use")
	maxClients := fs.Float64("maxclients", 10000, "Redis maxclients of the current settings")
	infoMaxAge := fs.Duration("info-max-age", 10*time.Second, "SIDELOCK_HEALTH_INFO_MAX_AGE of the current settings")
	recInterval := fs.Duration("recommended-health-interval", 10*time.Second, "SIDELOCK_HEALTH_INTERVAL recommended for large fleets")
	recInfoMaxAge := fs.Duration("recommended-info-max-age", time.Minute, "SIDELOCK_HEALTH_INFO_MAX_AGE recommended for large fleets")
	recMaxClients := fs.Float64("recommended-maxclients", 40000, "Redis maxclients recommended for large fleets")
	pods := fs.Float64("fleet-pods", 10000, "pods of the fleet whose groups are counted")
	cycles := fs.Float64("fleet-cycles", 10, "acquire+release cycles per pod per second of that fleet")
	if err := fs.Parse(args); err != nil {
		return options{}, err
	}
	walls := Walls{CPUBudget: *budget, MaxClients: *maxClients}
	return options{
		inputs: strings.Split(*inputs, ","), sim: *sim, png: *png, table: *table,
		current: Settings{
			Name:           fmt.Sprintf("shipped (health 1 s, server info max age %v, maxclients %s)", *infoMaxAge, num(*maxClients)),
			HealthInterval: 1, InfoMaxAge: infoMaxAge.Seconds(), Walls: walls,
		},
		recommended: Settings{
			Name:           fmt.Sprintf("recommended (health %v, server info max age %v, maxclients %s)", *recInterval, *recInfoMaxAge, num(*recMaxClients)),
			HealthInterval: recInterval.Seconds(), InfoMaxAge: recInfoMaxAge.Seconds(), Walls: Walls{CPUBudget: *budget, MaxClients: *recMaxClients},
		},
		fleetPods: *pods, fleetCycles: *cycles, plotMaxSidecar: 10000,
	}, nil
}

func run(args []string, stdout, stderr io.Writer) error {
	opt, err := parseOptions(args, stderr)
	if err != nil {
		return err
	}
	in, source, err := loadInputs(opt.inputs, stderr)
	if err != nil {
		return err
	}
	simResults, err := benchread.ReadFile(opt.sim, stderr)
	if err != nil {
		return err
	}
	runs, err := simRuns(simResults)
	if err != nil {
		return fmt.Errorf("%s: %w", opt.sim, err)
	}
	var doc bytes.Buffer
	writeDocument(&doc, in, runs, opt, source)
	if _, err := stdout.Write(doc.Bytes()); err != nil {
		return err
	}
	if err := writeFile(opt.table, doc.Bytes()); err != nil {
		return err
	}
	var img bytes.Buffer
	if err := plotFigure(in, runs, opt).render(&img); err != nil {
		return err
	}
	return writeFile(opt.png, img.Bytes())
}

// loadInputs reads the model's inputs from the first file that has them,
// saying so when an earlier one does not; a real sidecar's RSS is taken
// from any file that has it.
func loadInputs(paths []string, stderr io.Writer) (Inputs, string, error) {
	all := results{}
	source := ""
	for _, p := range paths {
		r, err := benchread.ReadFile(p, stderr)
		if err != nil {
			fmt.Fprintf(stderr, "scale-model: %v\n", err)
			continue
		}
		if source == "" && r.Has(costModel) {
			source = p
			for k, v := range r {
				if strings.HasPrefix(k, costModel) {
					all[k] = v
				}
			}
		} else if source == "" {
			fmt.Fprintf(stderr, "scale-model: %s has no BenchmarkCostModel lines (run make bench); trying the next file\n", p)
		}
		for k, v := range r {
			if strings.HasPrefix(k, sidecarRSS+"|") && all[k] == nil {
				all[k] = v
			}
		}
	}
	if source == "" {
		return Inputs{}, "", fmt.Errorf("no BenchmarkCostModel results in %s: run make scale-sim or make bench", strings.Join(paths, ", "))
	}
	in, err := inputsFrom(all)
	return in, source, err
}

func writeFile(path string, data []byte) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	return os.WriteFile(path, data, 0o644)
}

// writeDocument is docs/scale/table.md: every table docs/scale.md quotes.
func writeDocument(w io.Writer, in Inputs, runs []SimRun, opt options, source string) {
	fmt.Fprintf(w, "<!-- Written by `go run ./scale-model` in tools/ (make scale-sim) from %s and %s. -->\n\n", source, opt.sim)
	fmt.Fprintf(w, "### Model inputs (from %s)\n\n", source)
	writeInputs(w, in)
	fmt.Fprintf(w, "\n### Model against simulation (groups of 3 masters; per sidecar %g cycles/s, %g held locks, %g names)\n\n",
		runs[0].TargetCycles, runs[0].Held, runs[0].Names)
	fmt.Fprintln(w, "Per-master figures are means over every master of every group.")
	fmt.Fprintln(w)
	writeComparison(w, in, runs)
	fmt.Fprintln(w)
	writeSimContext(w, runs)
	fmt.Fprintf(w, "\n### What more groups change per master (simulated)\n\n")
	writeGroupCheck(w, in, runs)
	for _, s := range []Settings{opt.current, opt.recommended} {
		fmt.Fprintf(w, "\n### Largest fleet one group serves — %s, master CPU ≤ %.0f %% of a core\n\n", s.Name, s.Walls.CPUBudget*100)
		writeCapacity(w, in, s)
	}
	fmt.Fprintf(w, "\n### What health rounds and member-list checks cost a master\n\n")
	writeHealthCost(w, in)
	fmt.Fprintf(w, "\n### Groups for %s pods × %g cycles/s\n\n", num(opt.fleetPods), opt.fleetCycles)
	writeGroups(w, in, opt.fleetPods, opt.fleetCycles, []Settings{opt.current, opt.recommended})
	fmt.Fprintln(w)
	writeSideCosts(w, in)
}

// plotFigure is the simulated fleet's model curve against its
// measurements, extended to 10 000 sidecars to show where each wall is met.
func plotFigure(in Inputs, runs []SimRun, opt options) figure {
	var one, more []SimRun
	for _, r := range runs {
		if r.Groups > 1 {
			more = append(more, r)
		} else {
			one = append(one, r)
		}
	}
	if len(one) == 0 {
		one = runs
		more = nil
	}
	base := one[0].Fleet()
	base.Cycles = one[0].TargetCycles
	groupsK := 0
	if len(more) > 0 {
		groupsK = int(more[0].Groups)
	}
	curve := func(groups int, y func(Master, Pod, Fleet) float64) []point {
		if groups == 0 {
			return nil
		}
		var pts []point
		for x := 10.0; x <= opt.plotMaxSidecar*1.0001; x *= math.Pow(10, 0.05) {
			f := base
			f.Pods = x
			f.Groups = groups
			pts = append(pts, point{x, y(in.PerMaster(f), in.PerPod(f), f)})
		}
		return pts
	}
	points := func(runs []SimRun, y func(SimRun) float64) []point {
		var pts []point
		for _, r := range runs {
			if r.Groups > 1 && int(r.Groups) != groupsK {
				continue // one K per figure
			}
			pts = append(pts, point{r.Sidecars, y(r)})
		}
		return pts
	}
	mk := func(title string, ym func(Master, Pod, Fleet) float64, ys func(SimRun) float64) panel {
		return panel{title: title, model: curve(1, ym), sim: points(one, ys), modelK: curve(groupsK, ym), simK: points(more, ys)}
	}
	cpu := mk("Redis CPU per master (% of one core)",
		func(m Master, _ Pod, _ Fleet) float64 { return m.CPU / 1e4 }, func(r SimRun) float64 { return r.RedisCPU / 1e4 })
	cpu.wall, cpu.wallLabel = opt.current.Walls.CPUBudget*100, fmt.Sprintf("%.0f%% budget", opt.current.Walls.CPUBudget*100)
	conns := mk("Connections per master",
		func(m Master, _ Pod, _ Fleet) float64 { return m.Conns }, func(r SimRun) float64 { return r.Clients })
	conns.wall, conns.wallLabel = opt.current.Walls.MaxClients, "maxclients "+num(opt.current.Walls.MaxClients)
	mem := mk("Redis memory per master (MB)",
		func(m Master, _ Pod, _ Fleet) float64 { return m.Memory / (1 << 20) }, func(r SimRun) float64 { return r.RedisMemory / (1 << 20) })
	side := mk("CPU of all sidecars (% of one core)",
		func(_ Master, p Pod, f Fleet) float64 { return p.CPU * f.Pods / 1e4 }, func(r SimRun) float64 { return r.SimCPU * r.Sidecars / 1e4 })
	side.wall, side.wallLabel = 200, "this machine: 2 cores"
	groupsLine := "One group of 3 Redis masters"
	if groupsK > 1 {
		groupsLine = fmt.Sprintf("One group of 3 Redis masters and (green) %d groups of 3", groupsK)
	}
	return figure{
		title: "sidelock fleet cost: model against simulation",
		subtitle: []string{
			fmt.Sprintf("%s; per sidecar %g acquire+release cycles/s, %g held locks, a health round every %g s, a member-list check every %g s.", groupsLine, base.Cycles, base.Held, base.HealthInterval, memberCheckEvery),
			fmt.Sprintf("Points: in-process sidecars against real masters on a shared 2-core machine; the model runs on to %s sidecars.", num(opt.plotMaxSidecar)),
		},
		groupsK: groupsK,
		xLabel:  "sidecars (pods)", xMin: 10, xMax: opt.plotMaxSidecar,
		panels: []panel{cpu, conns, mem, side},
	}
}
