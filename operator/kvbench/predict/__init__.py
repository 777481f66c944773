"""What-if planning (`kvbench predict`): fit a timing profile's free constants to runs measured
on real vLLM, check the fit on held-out runs, and run another layout in virtual time with it."""
