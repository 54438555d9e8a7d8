# Thin front end over CMake (docs/DESIGN.md §1):
#   make run   installs what is missing, builds, runs configs/tiny-sft.ini then
#              configs/tiny.ini (cold-start SFT, then RL against KernelGym)
#   make test  installs what is missing, builds, runs every test this machine can
# `./train` and `./kernelgym` are left at the top of the checkout.
JOBS ?= $(shell nproc)
BUILD ?= build

.PHONY: all deps build run test clean
all: build

deps:
	@bash tools/install-deps.sh

build: deps
	@cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=Release >/dev/null
	@cmake --build $(BUILD) -j $(JOBS)
	@ln -sf $(BUILD)/train train
	@if [ -x $(BUILD)/kernelgym ]; then ln -sf $(BUILD)/kernelgym kernelgym; fi

run: build
	./train configs/tiny-sft.ini
	./train configs/tiny.ini

test: build
	cd $(BUILD) && ctest --output-on-failure -j $(JOBS)

clean:
	rm -rf $(BUILD) train kernelgym
