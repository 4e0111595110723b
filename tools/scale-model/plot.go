package main

import (
	"fmt"
	"image"
	"image/color"
	"image/draw"
	"image/png"
	"io"
	"math"
)

// The plot: four log-log panels of a quantity against the number of
// sidecars, each with the model's curve, the simulation's points and the
// wall the quantity runs into.

var (
	white       = color.RGBA{255, 255, 255, 255}
	black       = color.RGBA{20, 20, 20, 255}
	grey        = color.RGBA{120, 120, 120, 255}
	gridGrey    = color.RGBA{225, 225, 225, 255}
	modelBlue   = color.RGBA{31, 100, 200, 255}
	measured    = color.RGBA{230, 110, 0, 255}
	groupsGreen = color.RGBA{20, 150, 70, 255} // the multi-group fleet: its curve and points
	wallRed     = color.RGBA{200, 30, 30, 255}
)

// panel is one quantity: its curve, its points and an optional wall.
type panel struct {
	title     string
	model     []point // the model's curve
	sim       []point // the simulation's measurements
	modelK    []point // the model for K groups (none if not simulated)
	simK      []point // the simulation with K groups
	wall      float64 // 0: none
	wallLabel string
}

type point struct{ x, y float64 }

// figure is the whole image.
type figure struct {
	title      string
	subtitle   []string // lines
	groupsK    int      // K of modelK and simK (0: none)
	xLabel     string
	xMin, xMax float64
	panels     []panel
}

const (
	figW, figH   = 1500, 1100
	headerH      = 150
	panelPadding = 90
	textScale    = 2
)

// render draws the figure as a PNG.
func (f figure) render(w io.Writer) error {
	img := image.NewRGBA(image.Rect(0, 0, figW, figH))
	draw.Draw(img, img.Bounds(), &image.Uniform{white}, image.Point{}, draw.Src)
	drawText(img, 30, 20, f.title, 3, black)
	for i, line := range f.subtitle {
		drawText(img, 30, 58+i*22, line, textScale, grey)
	}
	drawLegend(img, 30, 58+len(f.subtitle)*22+12, f.groupsK)
	cols, rows := 2, (len(f.panels)+1)/2
	cellW, cellH := figW/cols, (figH-headerH)/rows
	for i, p := range f.panels {
		x0, y0 := (i%cols)*cellW, headerH+(i/cols)*cellH
		area := image.Rect(x0+panelPadding, y0+45, x0+cellW-40, y0+cellH-70)
		f.drawPanel(img, area, p)
	}
	return png.Encode(w, img)
}

func drawLegend(img *image.RGBA, x, y, groupsK int) {
	thickLine(img, x, y+7, x+40, y+7, modelBlue)
	drawText(img, x+50, y, "model", textScale, black)
	x += 50 + textWidth("model") + 40
	disc(img, x+10, y+7, 7, measured)
	drawText(img, x+30, y, "measured (simulation)", textScale, black)
	x += 30 + textWidth("measured (simulation)") + 40
	if groupsK > 1 {
		label := fmt.Sprintf("%d groups: model, measured", groupsK)
		thickLine(img, x, y+7, x+40, y+7, groupsGreen)
		square(img, x+60, y+7, 7, groupsGreen)
		drawText(img, x+80, y, label, textScale, black)
		x += 80 + textWidth(label) + 40
	}
	dashedHLine(img, x, x+40, y+7, wallRed)
	drawText(img, x+50, y, "wall", textScale, black)
}

// axis maps a value to a pixel on a log scale.
type axis struct {
	lo, hi   float64 // decades: log10 of the ends
	from, to int     // pixels
}

func (a axis) at(v float64) int {
	t := (math.Log10(v) - a.lo) / (a.hi - a.lo)
	return a.from + int(math.Round(t*float64(a.to-a.from)))
}

func (f figure) drawPanel(img *image.RGBA, area image.Rectangle, p panel) {
	xs := axis{lo: math.Log10(f.xMin), hi: math.Log10(f.xMax), from: area.Min.X, to: area.Max.X}
	lo, hi := decadeRange(p)
	ys := axis{lo: lo, hi: hi, from: area.Max.Y, to: area.Min.Y}
	drawGrid(img, area, xs, ys)
	drawText(img, area.Min.X, area.Min.Y-35, p.title, textScale, black)
	drawText(img, area.Min.X+(area.Dx()-textWidth(f.xLabel))/2, area.Max.Y+35, f.xLabel, textScale, grey)
	if p.wall > 0 {
		y := ys.at(p.wall)
		dashedHLine(img, area.Min.X, area.Max.X, y, wallRed)
		// At the left end, where the curves (rising to the right) are
		// furthest below a wall.
		drawText(img, area.Min.X+8, y-textHeight()-6, p.wallLabel, textScale, wallRed)
	}
	for i := 1; i < len(p.model); i++ {
		a, b := p.model[i-1], p.model[i]
		thickLine(img, xs.at(a.x), ys.at(a.y), xs.at(b.x), ys.at(b.y), modelBlue)
	}
	for i := 1; i < len(p.modelK); i++ {
		a, b := p.modelK[i-1], p.modelK[i]
		thickLine(img, xs.at(a.x), ys.at(a.y), xs.at(b.x), ys.at(b.y), groupsGreen)
	}
	for _, pt := range p.sim {
		disc(img, xs.at(pt.x), ys.at(pt.y), 7, measured)
	}
	for _, pt := range p.simK {
		square(img, xs.at(pt.x), ys.at(pt.y), 7, groupsGreen)
	}
	strokeRect(img, area, black)
}

// decadeRange is the whole decades that hold every value of the panel.
func decadeRange(p panel) (lo, hi float64) {
	lo, hi = math.Inf(1), math.Inf(-1)
	for _, pts := range [][]point{p.model, p.sim, p.modelK, p.simK} {
		for _, pt := range pts {
			if pt.y > 0 {
				lo, hi = math.Min(lo, pt.y), math.Max(hi, pt.y)
			}
		}
	}
	if p.wall > 0 {
		lo, hi = math.Min(lo, p.wall), math.Max(hi, p.wall)
	}
	lo, hi = math.Floor(math.Log10(lo)), math.Ceil(math.Log10(hi)*1.0001)
	if hi-lo < 2 {
		hi = lo + 2
	}
	return lo, hi
}

// drawGrid draws decade lines with labels and lighter lines at 2–9.
func drawGrid(img *image.RGBA, area image.Rectangle, xs, ys axis) {
	for d := math.Floor(xs.lo); d <= xs.hi; d++ {
		for m := 1.0; m < 10; m++ {
			v := m * math.Pow(10, d)
			x := xs.at(v)
			if x < area.Min.X || x > area.Max.X {
				continue
			}
			if m == 1 {
				vLine(img, x, area.Min.Y, area.Max.Y, gridGrey)
				label := compact(v)
				drawText(img, x-textWidth(label)/2, area.Max.Y+10, label, textScale, black)
			}
		}
	}
	for d := ys.lo; d <= ys.hi; d++ {
		y := ys.at(math.Pow(10, d))
		hLine(img, area.Min.X, area.Max.X, y, gridGrey)
		label := compact(math.Pow(10, d))
		drawText(img, area.Min.X-textWidth(label)-10, y-textHeight()/2, label, textScale, black)
	}
}

// compact writes a power of ten briefly: 0.01, 1, 100, 10K, 1M.
func compact(v float64) string {
	switch {
	case v >= 1e6:
		return fmt.Sprintf("%gM", v/1e6)
	case v >= 1e3:
		return fmt.Sprintf("%gK", v/1e3)
	default:
		return fmt.Sprintf("%g", v)
	}
}

func fillRect(img *image.RGBA, x, y, w, h int, c color.Color) {
	draw.Draw(img, image.Rect(x, y, x+w, y+h).Intersect(img.Bounds()), &image.Uniform{c}, image.Point{}, draw.Src)
}

func hLine(img *image.RGBA, x0, x1, y int, c color.Color) { fillRect(img, x0, y, x1-x0+1, 1, c) }
func vLine(img *image.RGBA, x, y0, y1 int, c color.Color) { fillRect(img, x, y0, 1, y1-y0+1, c) }

func strokeRect(img *image.RGBA, r image.Rectangle, c color.Color) {
	hLine(img, r.Min.X, r.Max.X, r.Min.Y, c)
	hLine(img, r.Min.X, r.Max.X, r.Max.Y, c)
	vLine(img, r.Min.X, r.Min.Y, r.Max.Y, c)
	vLine(img, r.Max.X, r.Min.Y, r.Max.Y, c)
}

func dashedHLine(img *image.RGBA, x0, x1, y int, c color.Color) {
	for x := x0; x < x1; x += 14 {
		fillRect(img, x, y-1, min(8, x1-x), 3, c)
	}
}

// lineWidth is the curves' brush, in pixels.
const lineWidth = 3

// thickLine draws from (x0,y0) to (x1,y1) with a square brush.
func thickLine(img *image.RGBA, x0, y0, x1, y1 int, c color.Color) {
	const w = lineWidth
	steps := max(abs(x1-x0), abs(y1-y0), 1)
	for i := 0; i <= steps; i++ {
		x := x0 + (x1-x0)*i/steps
		y := y0 + (y1-y0)*i/steps
		fillRect(img, x-w/2, y-w/2, w, w, c)
	}
}

func disc(img *image.RGBA, cx, cy, r int, c color.Color) {
	for dy := -r; dy <= r; dy++ {
		for dx := -r; dx <= r; dx++ {
			if dx*dx+dy*dy <= r*r {
				img.Set(cx+dx, cy+dy, c)
			}
		}
	}
}

func square(img *image.RGBA, cx, cy, r int, c color.Color) {
	fillRect(img, cx-r, cy-r, 2*r+1, 2*r+1, c)
}

func abs(v int) int {
	if v < 0 {
		return -v
	}
	return v
}
